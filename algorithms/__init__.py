"""The tutorial's algorithms, one module per section, each with its compiled fast path beside it."""
