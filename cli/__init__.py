"""The `vkgraph` command line."""
