"""EAGLE draft worker extensions."""
