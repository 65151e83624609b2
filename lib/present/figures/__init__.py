"""Pure figure builders: results in, ``plotly.graph_objects.Figure`` out. No streamlit.

``style`` holds what every figure shares (colours per formula and source, the base layout);
``check`` draws the comparison engine's results; ``landscape`` draws surfaces, fields and
trajectories.
"""
