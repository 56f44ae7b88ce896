"""The join stage: plan outputs (:mod:`.plan`, :mod:`.planned`), keep replicas
of the captured tables (:mod:`.replica`), find the output partitions a batch
affects (:mod:`.propagate`) and recompute them on Spark (:mod:`.engine`);
:mod:`.batch` is one micro-batch's part of it."""
