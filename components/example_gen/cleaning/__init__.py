"""Cleaning of ingested documents as Beam transforms (see `transforms.CleanDocuments`)."""
