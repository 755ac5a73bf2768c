"""Small widgets and helpers the other parts share."""
