"""vkgraph engine: cfg files -> graph of modules -> nodes -> recorded Vulkan commands -> frames."""
