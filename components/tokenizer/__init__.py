"""The Tokenizer stage: a SentencePiece model learned (or reused, or pinned) before Transform.

    ids.py         the token ids every stage agrees on (special tokens, byte fallback)
    options.py     the typed `tokenizer` config section
    model_file.py  reading, checking and hashing a SentencePiece model file
    learn.py       learning a model from a sample of documents (sentencepiece)
    sample.py      drawing that sample from the train split with Beam
    graph.py       tokenizing and detokenizing inside a TF graph (TF Text)
    policy.py      which tokenizer a run uses: learn, reuse the production model's, or a pinned file
    component.py   the TFX component and its `Tokenizer` artifact
"""
