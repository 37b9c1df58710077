"""constructs"""
