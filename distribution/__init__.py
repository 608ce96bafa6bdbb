"""tf.distribute strategy construction."""
