<#
.SYNOPSIS
    Install ContextSpan for the current user on Windows: a virtual environment, a copy of the
    app and a Start-menu shortcut. Idempotent: run it again to update.

.DESCRIPTION
    powershell -ExecutionPolicy Bypass -File installer\windows\install.ps1 [-Prefix DIR]
        [-Torch pypi|cuda | -Client] [-Python py] [-DryRun] [-Uninstall] [-Purge]

    -Torch pypi  torch from PyPI: on Windows that is the CPU-only build (default)
    -Torch cuda  torch's CUDA 12.8 build from https://download.pytorch.org/whl/cu128 (NVIDIA GPU)
    -Client      the thin client: no speech engine here (no torch, moshi or bitsandbytes); the
                 speech model and its recognition run on a server (python main.py serve)
    UNTESTED on Windows: written on Linux, where PowerShell itself is not available.
#>
[CmdletBinding()]
param(
    [string]$Prefix = (Join-Path $env:LOCALAPPDATA "ContextSpan-install"),
    [ValidateSet("pypi", "cuda")][string]$Torch = "",
    [string]$Python = "py",
    [switch]$Client,
    [switch]$DryRun,
    [switch]$Uninstall,
    [switch]$Purge
)
$ErrorActionPreference = "Stop"

$Root = (Resolve-Path (Join-Path $PSScriptRoot "..\..")).Path
$Venv = Join-Path $Prefix "venv"
$Src = Join-Path $Prefix "app"
$Stamp = Join-Path $Prefix ".install-stamp"
$Programs = [Environment]::GetFolderPath("Programs")
$Shortcut = Join-Path $Programs "ContextSpan.lnk"
$CudaIndex = "https://download.pytorch.org/whl/cu128"

function Step([string]$Message) { Write-Host "==> $Message" }

# Run a program, or only print it with -DryRun; stop on a non-zero exit.
function Invoke-Step([string]$Exe, [string[]]$Arguments) {
    if ($DryRun) { Write-Host "+ $Exe $($Arguments -join ' ')"; return }
    & $Exe @Arguments
    if ($LASTEXITCODE -ne 0) { throw "$Exe failed with exit code $LASTEXITCODE" }
}

function Remove-Path([string]$Path) {
    if ($DryRun) { Write-Host "+ remove $Path"; return }
    if (Test-Path $Path) { Remove-Item -Recurse -Force $Path }
}

if ($Uninstall) {
    Step "Removing ContextSpan from $Prefix and the Start-menu shortcut"
    Remove-Path $Prefix
    Remove-Path $Shortcut
    if ($Purge) {
        Step "Removing checkpoints, settings and caches"
        Remove-Path (Join-Path $env:LOCALAPPDATA "ContextSpan")
        Remove-Path (Join-Path $env:APPDATA "ContextSpan")
    } else {
        Write-Host "Kept downloaded checkpoints and settings ($env:LOCALAPPDATA\ContextSpan); -Purge removes them."
    }
    Write-Host "ContextSpan is uninstalled."
    exit 0
}

Step "Checking Python ($Python)"
$PyArgs = @()
if ($Python -eq "py") { $PyArgs = @("-3") }
& $Python @PyArgs -c "import sys; sys.exit(sys.version_info < (3, 10))"
if ($LASTEXITCODE -ne 0) {
    throw "ContextSpan needs Python 3.10 or newer (https://www.python.org/downloads/); pass -Python C:\path\to\python.exe"
}

if ($Client -and $Torch) { throw "-Client installs no torch: leave out -Torch" }
# What is installed, for the stamp: the torch choice, or "client" ($Torch keeps its
# ValidateSet, so it never holds "client").
$Kind = "client"
if ($Client) {
    Step "The thin client: no speech engine here (no torch); the speech model runs on a server"
} else {
    if (-not $Torch) {
        $Torch = "pypi"
        if (Get-Command nvidia-smi -ErrorAction SilentlyContinue) { $Torch = "cuda" }
    }
    $Kind = $Torch
    if ($Torch -eq "cuda") { Step "NVIDIA GPU: torch's CUDA build from $CudaIndex (about 2.5 GB)" }
    else { Step "torch from PyPI: the CPU-only build on Windows" }
}

Step "Copying the app to $Src"
if (-not $DryRun) { New-Item -ItemType Directory -Force -Path $Prefix | Out-Null }
Remove-Path $Src
foreach ($Item in @("app", "models", "assets", "docs", "main.py", "pyproject.toml", "README.md")) {
    if ($DryRun) { Write-Host "+ copy $Item"; continue }
    New-Item -ItemType Directory -Force -Path $Src | Out-Null
    Copy-Item -Recurse -Force (Join-Path $Root $Item) $Src
}

Step "Making the virtual environment $Venv"
$VenvPython = Join-Path $Venv "Scripts\python.exe"
if (-not (Test-Path $VenvPython)) { Invoke-Step $Python ($PyArgs + @("-m", "venv", $Venv)) }

$Want = "$((Get-FileHash (Join-Path $Root "pyproject.toml")).Hash)-$Kind"
if ($DryRun -or -not (Test-Path $Stamp) -or (Get-Content $Stamp) -ne $Want) {
    Step "Installing ContextSpan and its dependencies (a few GB on the first install)"
    Invoke-Step $VenvPython @("-m", "pip", "install", "--quiet", "--upgrade", "pip")
    if ($Torch -eq "cuda") {
        Invoke-Step $VenvPython @("-m", "pip", "install", "--quiet", "torch>=2.2,<2.10", "--index-url", $CudaIndex)
    }
    # Editable, from the copy: the app finds its model catalog (models\) next to app\.
    # The engine extra (torch, moshi) unless this is the thin client.
    $Target = if ($Client) { $Src } else { "$Src[engine]" }
    Invoke-Step $VenvPython @("-m", "pip", "install", "--quiet", "-e", $Target)
    if (-not $DryRun) { Set-Content -Path $Stamp -Value $Want }
} else {
    Step "Dependencies are up to date"
}

Step "Adding the Start-menu shortcut $Shortcut"
$Pythonw = Join-Path $Venv "Scripts\pythonw.exe"
if ($DryRun) {
    Write-Host "+ shortcut $Shortcut -> $Pythonw $Src\main.py"
} else {
    $Shell = New-Object -ComObject WScript.Shell
    $Link = $Shell.CreateShortcut($Shortcut)
    $Link.TargetPath = $Pythonw
    $Link.Arguments = "`"$(Join-Path $Src "main.py")`""
    $Link.WorkingDirectory = $Src
    $Link.IconLocation = (Join-Path $Src "assets\contextspan.ico")
    $Link.Description = "ContextSpan voice assistant"
    $Link.Save()
}
Write-Host "ContextSpan is installed: find it in the Start menu, or run $VenvPython $Src\main.py"
