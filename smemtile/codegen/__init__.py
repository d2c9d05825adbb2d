"""Code generation: a family configuration rendered into a standalone ``.cu`` (``render``), its bank table
(``analysis``) and the review checklist evaluated on the artefact (``checklist``). Pure Python, no CUDA.

    from smemtile.families import configure
    from smemtile.codegen.render import render
    gk = render(configure("sgemm", {"M": 4096, "N": 4096, "K": 4096}, {"As": {"pad": 4}}, "sm_90"))
    gk.source        # the .cu a user gets; gk.body is what NVRTC compiles; gk.launch the launch everyone uses
"""
