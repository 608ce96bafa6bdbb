"""How a step is spread over devices: strategies, plans, meshes, gradient
summation and weight-update sharding."""
