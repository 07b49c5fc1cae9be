"""The chat page at / in headless Chromium (Debian's chromium + chromedriver, driven by selenium):
it loads, shows the model, sends a message and the answer streams in piece by piece."""
import shutil
import time

import pytest

from conftest import BINARY
from server_process import ServerProcess


def chromium_driver():
    try:
        from selenium import webdriver
    except ImportError:
        pytest.fail("selenium is needed (scripts/setup.sh installs it)")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not chromedriver:
        pytest.fail("chromium and chromium-driver are needed (scripts/setup.sh installs them)")
    opts = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        opts.add_argument(arg)
    opts.binary_location = chromium
    return webdriver.Chrome(service=Service(chromedriver), options=opts)


def test_chat_page_streams_an_answer(smollm2):
    from selenium.webdriver.common.by import By
    driver = chromium_driver()  # first: a missing browser fails the test before a server starts
    s = ServerProcess(BINARY, smollm2, "--kv-cache-memory", "64MiB", "--max-model-len", "1024",
                      "--served-model-name", "smollm2")
    try:
        driver.get(s.url + "/")
        deadline = time.time() + 30
        while "smollm2" not in driver.find_element(By.ID, "model").text and time.time() < deadline:
            time.sleep(0.05)
        assert "smollm2" in driver.find_element(By.ID, "model").text
        driver.execute_script("document.getElementById('max').value = '48'")
        driver.find_element(By.ID, "input").send_keys("Write a short poem about the sea.")
        driver.find_element(By.ID, "send").click()
        seen = []
        deadline = time.time() + 120
        while time.time() < deadline:
            answers = driver.find_elements(By.CSS_SELECTOR, ".msg.assistant, .msg.error")
            if answers:
                text = answers[-1].text
                if text and (not seen or seen[-1] != text):
                    seen.append(text)
                if answers[-1].get_attribute("data-done") == "true":
                    break
            time.sleep(0.01)
        final = driver.find_elements(By.CSS_SELECTOR, ".msg")[-1]
        assert "error" not in final.get_attribute("class"), final.text
        assert final.get_attribute("data-done") == "true"
        assert len(final.text) > 20
        # Streamed: several growing prefixes of the final answer were on screen before it was done.
        partial = [t for t in seen if t != final.text]
        assert len(partial) >= 3, seen
        assert all(final.text.startswith(t) for t in partial)
        user = driver.find_elements(By.CSS_SELECTOR, ".msg.user")
        assert user and "poem about the sea" in user[0].text
    finally:
        driver.quit()
        assert s.stop() == 0
