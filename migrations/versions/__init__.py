"""Revision scripts; the file name starts with the readable revision id."""
