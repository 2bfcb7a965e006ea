"""One reader per corpus file format; `components.example_gen.readers` dispatches to them."""
