"""The inference benchmark harness around the MLCommons LoadGen."""
