"""Assembly: buffer change events until transactions are whole; release them in commit order."""
