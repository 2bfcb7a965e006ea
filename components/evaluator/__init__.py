"""Evaluator: eval-split perplexity and the ModelBlessing it decides."""
