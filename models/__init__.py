"""Models as plain tf.Module code with named variables."""
