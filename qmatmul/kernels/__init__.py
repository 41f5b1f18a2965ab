"""The course's own kernels: the expert decodes (expert.py), the MMA decodes in Gluon (mma_decode.py, on a weight
repacked by mma_repack.py), the GEMMs the chapters' wrappers hand a decoded weight to (gemm.py), split-K's shared
finish (splitk.py), the set-up's smoke kernel (smoke.py), and every launch's configuration on each class of GPU
(configs.py). None of them is an exercise's answer the learner is given, except what a chapter's GIVEN names."""
