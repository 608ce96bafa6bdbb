"""ResNet-50 (MLPerf `resnet`) and MobileNet-v1 (Inference v0.5's `mobilenet`).
Its README.md lists the files in reading order, the gin files and the docs
page."""
