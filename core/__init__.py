"""The floor under all others: what every process and entry point shares
(start-up, the entry points' contract, gin, error text, exit codes, storage
settings, staged files). It imports nothing else of the suite."""
