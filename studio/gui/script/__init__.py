"""The Script tab: a long-form script as lines, each rendered, retaken and exported."""
