"""Host input pipelines (tf.data), one module per data format."""
