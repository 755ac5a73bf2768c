"""Long-form scripts: one utterance per line, each with its voice; rendered line by line, joined, subtitled."""
