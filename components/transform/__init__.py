"""Transform: tokenization inside the TF Transform graph."""
