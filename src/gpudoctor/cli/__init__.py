"""The thin command-line layer: parse -> call one library function -> render."""
