"""The applications: programs built on the engine (pipeline/) through `vkgraph.Session`.

`Denoiser` (denoise.py) and `Demosaicer` (rawdenoise.py) behind `vkgraph denoise`, the
held-out evaluation (heldout.py), noise estimation (noise.py, camnoise.py, camera.py),
`vkgraph sweep`'s search (sweep.py) and its Ray plumbing (distributed.py), small DNGs
(dng.py) and the gui's picture (compose.py). They may use the engine and the module
folders; the engine uses none of them (tests/test_floors.py).
"""
