"""Counts the test cases in meson's JUnit log and prints 'tests: N passed, N failed, N skipped'.

GoogleTest programs contribute one case per TEST; other programs count as one case each.
Exits non-zero when nothing ran, so an empty suite cannot pass unnoticed.
"""
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
passed = failed = skipped = 0
for case in root.iter("testcase"):
    if case.find("failure") is not None or case.find("error") is not None:
        failed += 1
    elif case.find("skipped") is not None:
        skipped += 1
    else:
        passed += 1
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if passed + failed == 0 else 0)
