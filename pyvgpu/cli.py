"""placeholder, replaced by the control-plane work"""
def main() -> int:
    return 0
