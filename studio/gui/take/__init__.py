"""The take: its text and tags, the controller that owns it while it runs, the takes list, a take's details and export."""
