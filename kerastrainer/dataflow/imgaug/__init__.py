"""Image augmentors on OpenCV."""
