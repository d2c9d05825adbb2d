"""Code generation: a family configuration rendered into a standalone ``.cu`` (``render``), its bank table
(``analysis``) and the review checklist evaluated on the artefact (``checklist``). Pure Python, no CUDA.

    from smemtile.families import configure
    from smemtile.codegen.render import render
    gk = render(configure(name, {**params, **problem}, {buffer: {"pad": 4}}, "sm_90"))  # a registered family
    gk.source        # the .cu a user gets; gk.body is what NVRTC compiles; gk.launch the launch everyone uses
"""
