"""What the Evaluator writes into its ModelBlessing artifact, by file name: the product other
stages read (the Pusher puts evaluation.json's gates and metrics in the model card)."""

REPORT_FILE = "evaluation.json"  # every gate's value, threshold and verdict, the metrics, the baseline
HTML_REPORT_FILE = "report.html"  # the same for a reader
