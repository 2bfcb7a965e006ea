"""Data gate: stops the run before Transform when TFDV reports blocking anomalies."""
