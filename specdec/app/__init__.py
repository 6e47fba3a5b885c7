"""The web app's handlers: the model store, the Compare view's work and what it shows, the Live view.
Plain functions and data; app.py (the entry point) lays out the page and wires them into Gradio.
Nothing in the package imports this wing."""
