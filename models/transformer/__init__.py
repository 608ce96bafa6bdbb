"""Transformer (MLPerf `transformer`). Its README.md lists the files in reading
order, the gin files and the docs page."""
