#!/usr/bin/env bash
# Install the Debian/Ubuntu packages a role needs, when they are missing and we may (root).
# Usage: bash installer/system_packages.sh app|tests
set -euo pipefail

APP_PACKAGES=(
    libportaudio2                      # sounddevice's PortAudio (the wheel does not bundle it)
    libegl1 libgl1 libfontconfig1 libdbus-1-3 libxkbcommon-x11-0   # Qt's xcb platform
    libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-shape0 libxcb-render-util0
    libxcb-image0 libxcb-randr0 libxcb-xinerama0
)
TEST_PACKAGES=(
    libportaudio2 pulseaudio pulseaudio-utils libasound2-plugins  # a virtual sound card
    espeak-ng                                                      # spoken test questions
    shellcheck                                                     # the installers' lint
    g++                            # torch.compile's CPU code (the --compile step's tests)
    chromium chromium-driver       # a real browser on the reference protocol's page (headless)
)

case "${1:-app}" in
    app) wanted=("${APP_PACKAGES[@]}") ;;
    tests) wanted=("${TEST_PACKAGES[@]}") ;;
    *) echo "usage: $0 app|tests" >&2; exit 2 ;;
esac

command -v dpkg-query >/dev/null || exit 0   # not Debian-like: the README lists what to install
missing=()
for package in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "Installing system packages: ${missing[*]} ..." >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
elif command -v sudo >/dev/null && command -v apt-get >/dev/null; then
    echo "Installing system packages with sudo: ${missing[*]} ..." >&2
    sudo apt-get update -qq
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
else
    echo "Please install these packages first: ${missing[*]}" >&2
    exit 1
fi
