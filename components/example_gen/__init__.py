"""ExampleGen: corpus files (.txt, .jsonl) to tf.Example TFRecords."""
