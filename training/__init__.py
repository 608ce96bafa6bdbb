"""The training runtime: strategies in, MLPerf-compliant runs out."""
