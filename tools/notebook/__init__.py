"""What the notebooks (notebooks/*.ipynb) run: each model's quickstart table
(tools/write_notebooks.py is the command that writes them)."""
