"""Analysis: which analyses a question asks for, the ML registry, the code interpreter and its sandboxes."""
