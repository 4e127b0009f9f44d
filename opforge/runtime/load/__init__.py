"""Loading: the model file and its external data, model-local functions, op mappings, Constant
nodes as initializers."""
