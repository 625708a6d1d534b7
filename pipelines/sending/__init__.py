"""What happens to a message between ``send()`` and the wire (``outbound``), and the Dramatiq options
that could not work here, refused at send (``unsupported_options``).
"""
