"""The pipeline layer: composes the model, the kernel families, code generation and the GPU for the commands.

``specs`` resolves a spec against its family, ``fixes`` runs the fix search on what the kernel really issues,
``build`` compiles and checks a configuration, ``verify`` runs it; the CLI only parses and renders.
"""
