"""The sink: output Delta tables. :mod:`.delta` is the seam every Delta read
and write goes through; :mod:`.publish` commits a micro-batch's outputs."""
