<#
.SYNOPSIS
    Build the packaged Windows app: a PyInstaller one-folder build in dist\ContextSpan\, then
    (with -Installer) a setup program from contextspan.iss with Inno Setup 6.

.DESCRIPTION
    powershell -ExecutionPolicy Bypass -File installer\windows\build.ps1 [-Python PATH]
        [-Installer] [-DryRun]

    Model weights are never bundled. Builds with the torch installed in the Python it uses
    (the project's .venv by default): CPU-only from PyPI, or CUDA if install.ps1 -Torch cuda
    put it there. UNTESTED on Windows: written on Linux, where PowerShell is not available.
#>
[CmdletBinding()]
param(
    [string]$Python = "",
    [switch]$Installer,
    [switch]$DryRun
)
$ErrorActionPreference = "Stop"
$Root = (Resolve-Path (Join-Path $PSScriptRoot "..\..")).Path

function Step([string]$Message) { Write-Host "==> $Message" }
function Invoke-Step([string]$Exe, [string[]]$Arguments) {
    if ($DryRun) { Write-Host "+ $Exe $($Arguments -join ' ')"; return }
    & $Exe @Arguments
    if ($LASTEXITCODE -ne 0) { throw "$Exe failed with exit code $LASTEXITCODE" }
}

if (-not $Python) {
    $Python = Join-Path $Root ".venv\Scripts\python.exe"
    if (-not (Test-Path $Python)) {
        Step "Making the project's virtual environment"
        Invoke-Step "py" @("-3", "-m", "venv", (Join-Path $Root ".venv"))
        Invoke-Step $Python @("-m", "pip", "install", "--quiet", "-e", $Root)
    }
}

Step "Checking PyInstaller"
Invoke-Step $Python @("-m", "pip", "install", "--quiet", "pyinstaller>=6.10")

Step "Freezing the app with PyInstaller (several minutes: torch is large)"
$Dist = Join-Path $Root "dist"
if (-not $DryRun -and (Test-Path (Join-Path $Dist "ContextSpan"))) {
    Remove-Item -Recurse -Force (Join-Path $Dist "ContextSpan")
}
Invoke-Step $Python @("-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
    "--distpath", $Dist, "--workpath", (Join-Path $Root "build\pyinstaller"),
    (Join-Path $Root "installer\pyinstaller\contextspan.spec"))

if ($Installer) {
    Step "Making the setup program with Inno Setup"
    $Iscc = (Get-Command iscc -ErrorAction SilentlyContinue).Source
    if (-not $Iscc) { $Iscc = Join-Path ${env:ProgramFiles(x86)} "Inno Setup 6\ISCC.exe" }
    if (-not $DryRun -and -not (Test-Path $Iscc)) {
        throw "Inno Setup 6 is not installed (https://jrsoftware.org/isinfo.php)"
    }
    Invoke-Step $Iscc @((Join-Path $Root "installer\windows\contextspan.iss"))
}
Step "Done: $Dist\ContextSpan"
