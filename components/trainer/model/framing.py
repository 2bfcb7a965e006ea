"""How a document is framed as the model's input: the tokenizer's document prefix, the
document's tokens, its document suffix (`SpecialTokens`; the learned tokenizer's is an EOS
separator before each document).

Training frames every document it packs this way (training/data.py) and the exported `score`
signature frames each text the same way (serving/export.py), so a score is computed on what the
model was trained on.
"""

import tensorflow as tf

from components.tokenizer.special import SpecialTokens


def frame_documents(token_ids: tf.RaggedTensor, special: SpecialTokens) -> tf.RaggedTensor:
    """Ragged [documents, (tokens)] -> each row as document prefix + tokens + document suffix."""
    token_ids = tf.cast(token_ids, tf.int64)
    rows = token_ids.nrows()
    prefix = tf.tile(tf.constant(special.document_prefix, tf.int64)[tf.newaxis, :], [rows, 1])
    suffix = tf.tile(tf.constant(special.document_suffix, tf.int64)[tf.newaxis, :], [rows, 1])
    return tf.concat([prefix, token_ids, suffix], axis=1)
