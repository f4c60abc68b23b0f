; Inno Setup 6 script: a per-user setup program for the PyInstaller build in dist\ContextSpan\.
; Build it with installer\windows\build.ps1 -Installer (or: iscc installer\windows\contextspan.iss).
; UNTESTED: written on Linux, where Inno Setup does not run.

#define AppName "ContextSpan"
#define AppVersion "0.1.0"
#define Root "..\.."

[Setup]
AppId={{6F1C2A5E-3B7D-4C1E-9A0F-2D8E4B6C7A11}
AppName={#AppName}
AppVersion={#AppVersion}
AppPublisher=ContextSpan
DefaultDirName={localappdata}\Programs\{#AppName}
DefaultGroupName={#AppName}
PrivilegesRequired=lowest
OutputDir={#Root}\dist
OutputBaseFilename={#AppName}-{#AppVersion}-setup
SetupIconFile={#Root}\assets\contextspan.ico
UninstallDisplayIcon={app}\{#AppName}.exe
Compression=lzma2/normal
SolidCompression=no
DiskSpanning=no
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
WizardStyle=modern

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "{#Root}\dist\{#AppName}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{group}\{#AppName}"; Filename: "{app}\{#AppName}.exe"
Name: "{group}\Uninstall {#AppName}"; Filename: "{uninstallexe}"
Name: "{autodesktop}\{#AppName}"; Filename: "{app}\{#AppName}.exe"; Tasks: desktopicon

[Run]
Filename: "{app}\{#AppName}.exe"; Description: "{cm:LaunchProgram,{#AppName}}"; Flags: nowait postinstall skipifsilent

; Checkpoints and settings live in the user's data dirs and are kept on uninstall.
