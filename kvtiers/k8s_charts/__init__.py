"""k8s_charts"""
