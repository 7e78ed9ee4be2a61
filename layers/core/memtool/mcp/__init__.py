"""memtool's MCP face: the application services as tools (``service_tools``) and the MCP server
that offers them (``server``, run by ``memtool mcp``).

An entry point, like the API functions and the CLI: it sits above the API models and the
composition root, and nothing below imports it.
"""
