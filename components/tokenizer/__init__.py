"""The Tokenizer stage: the tokenizer a run uses, as an artifact, before Transform. Learned (or
reused, or pinned) SentencePiece, or a Hugging Face checkpoint's own tokenizer.

    ids.py         the token ids of the learned layout (special tokens, byte fallback)
    special.py     special ids as a property of a tokenizer: bos/eos/pad and document framing
    options.py     the typed `tokenizer` config section
    model_file.py  reading, checking and hashing a learned SentencePiece model file
    learn.py       learning a model from a sample of documents (sentencepiece)
    sample.py      drawing that sample from the train split with Beam
    graph.py       the learned model inside a TF graph (TF Text)
    hf_files.py    a checkpoint's tokenizer files: kind (tokenizer.json first, as transformers),
                   checks, special ids and how a prompt is framed
    byte_level.py  GPT-2's byte-to-character map and pre-tokenizer expression, as data
    bpe_merges.py  BPE merges in a TF graph, in `tokenizers`' order (shared by both BPE graphs)
    bpe_graph.py   byte-level BPE inside a TF graph (core ops + TF Text regex split)
    sentencepiece_bpe_graph.py  a SentencePiece-style tokenizer.json inside a TF graph (core ops)
    sentencepiece_graph.py  a checkpoint's tokenizer.model (no tokenizer.json) inside a TF graph
    piece_decoding.py  detokenizing SentencePiece-style pieces as Hugging Face's Llama decoder
    agreement.py   the Tokenizer stage's check of a tokenizer.json graph against `tokenizers`
    loaded.py      the one interface the other stages use: load a tokenizer directory, its
                   graph, special ids and hash
    policy.py      which tokenizer a run uses: learn, reuse the production model's, a pinned
                   file, or the checkpoint's
    component.py   the TFX component and its `Tokenizer` artifact
"""
