"""at_scale"""
