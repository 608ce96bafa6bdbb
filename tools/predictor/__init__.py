"""The time-to-train model behind `python -m tools.predict`: hardware from
public specifications (hardware.py), collectives on the slice's torus
(collectives.py), the program's cost from XLA (cost.py), convergence from
Google's v0.7 logs (convergence.py), and their sum (model.py); Google's v0.7
results as one table (google_v07.py) and the model's data (data/)."""
