"""SSD (MLPerf `ssd`) and SSD-MobileNet-v1 (Inference v0.5's `ssd-mobilenet`).
Its README.md lists the files in reading order, the gin files and the docs
page."""
