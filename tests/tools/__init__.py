"""Developer tools for the test suite (reference captures); not collected as tests."""
