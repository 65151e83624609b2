"""Gradient Lab: home page. (The dashboard proper arrives with the dashboard issue.)"""

import streamlit as st

from lib.family import families

st.set_page_config(page_title="Gradient Lab", page_icon="∇", layout="wide")
st.title("∇ Gradient Lab")
st.write(
    "See where a hand-written `torch.autograd.Function` backward is wrong. "
    "The first specimen is a popular tutorial's cosine-similarity loss, whose backward has its sign "
    "flipped and its normalisation missing."
)
for family in families().values():
    st.subheader(family.title)
    st.latex(family.forward_latex)
    st.table({"formula": list(family.formulas), "what it is": [f.summary for f in family.formulas.values()]})
