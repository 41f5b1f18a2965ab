"""The course's own kernels: the expert decodes (expert.py), the MMA decodes in Gluon (mma_decode.py), the GEMMs the
chapters' wrappers hand a decoded weight to (gemm.py), split-K's shared finish (splitk.py) and the set-up's smoke
kernel (smoke.py). None of them is an exercise's answer the learner is given, except what a chapter's GIVEN names."""
