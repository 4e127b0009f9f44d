"""The graph: nodes in topological order, checks against the op schemas, types and shapes."""
