"""Measures that need no prompting: the likelihood of text and replies under a model (perplexity,
bits per byte), and scores of given text (reply metrics, sentiment, personal data)."""
